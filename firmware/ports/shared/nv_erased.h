/* Whether a flash erase unit already reads erased (all ones), so a port can skip erasing it: each
 * real port's port_nv_write asks before it erases a page, row or sector. */
#ifndef POET_NV_ERASED_H
#define POET_NV_ERASED_H

#include <stdint.h>

static inline int nv_unit_erased(const volatile uint32_t *w, uint32_t bytes)
{
    uint32_t i;
    for (i = 0; i < bytes / 4u; i++)
        if (w[i] != 0xFFFFFFFFu)
            return 0;
    return 1;
}

#endif
