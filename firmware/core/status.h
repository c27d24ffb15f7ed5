/* Status codes shared by the schedule validator, the link and the device API (docs/spec.md 5, 6, 7). */
#ifndef POET_STATUS_H
#define POET_STATUS_H

enum {
    POET_OK = 0,
    /* schedule validation, docs/spec.md section 5 */
    POET_E_SHORT = 1,
    POET_E_MAGIC = 2,
    POET_E_VERSION = 3,
    POET_E_CRC = 4,
    POET_E_LENGTH = 5,
    POET_E_HASH = 6,
    POET_E_NODES = 7,
    POET_E_ARENA = 8,
    POET_E_OPCODE = 9,
    POET_E_NODE_RANGE = 10,
    POET_E_BOUNDS = 11,
    POET_E_OVERLAP = 12,
    POET_E_NOT_RESIDENT = 13,
    POET_E_NOT_PAGED = 14,
    POET_E_DOUBLE_ALLOC = 15,
    POET_E_NOT_LIVE = 16,
    POET_E_RECOMPUTE = 17,
    POET_E_ORDER = 18,
    POET_E_LEAK = 19,
    POET_E_OUTPUT = 20, /* a forward schedule ends without its output resident */
    /* link, docs/spec.md section 6 */
    POET_E_FRAME = 32,
    POET_E_UNKNOWN_MSG = 33,
    POET_E_TOO_BIG = 34,
    POET_E_LINK_ORDER = 35,
    POET_E_MODEL = 36,
    POET_E_NO_SCHEDULE = 37,
    POET_E_PAGER = 38,
    POET_E_RANGE = 39,
    /* the device API (poet.h, docs/spec.md 7) */
    POET_E_BUNDLE = 40,   /* not a bundle this runtime reads, or its sections out of place */
    POET_E_DIVERGED = 41, /* the step's loss or weights were not finite (poet.h says what is left) */
    POET_E_NO_STATE = 42, /* restore: neither slot holds a whole save of this model */
    POET_E_STORE = 43     /* the store failed to read, write or erase, or is too small */
};

#define POET_NO_DETAIL 0xFFFFFFFFu

#endif
