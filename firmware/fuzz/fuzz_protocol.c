/* libFuzzer harness: the serial protocol as a board runs it (poet_run reading port_getc), with
 * every request handler, the model and schedule validators behind END_BLOB and the interpreter
 * behind STEP, on a 64 KiB pool (fuzz_port.c).
 * Input: one mode byte, then
 *   bit 0 = 1  raw bytes on the link (framing, resynchronisation, bad CRCs)
 *   bit 0 = 0  records [u8 type][u16 len][len payload bytes], each sent as a frame with a correct
 *              CRC, so mutations of a request reach its handler rather than the CRC check
 * Every reply must be a well-formed frame (fuzz_port.c checks each one). Each input starts from a
 * fresh link state: an empty model upload (BEGIN_BLOB model of 0 bytes, END_BLOB) drops every blob,
 * as the protocol specifies, so no state leaks from one input to the next. */
#include <stdlib.h>
#include <string.h>

#include "../core/model.h"
#include "../core/protocol.h"
#include "../core/util.h"
#include "fuzz_port.h"

/* Every node can be paged, each no bigger than the pool. */
static uint8_t swap_area[POET_MAX_NODES * POET_FUZZ_POOL];

static uint32_t put_frame(uint8_t *out, uint8_t type, const uint8_t *payload, uint16_t len)
{
    out[0] = POET_SYNC;
    out[1] = type;
    poet_wr16(out + 2, len);
    memcpy(out + 4, payload, len);
    poet_wr32(out + 4 + len, poet_crc32(0, out + 1, 3u + len));
    return 8u + len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint8_t begin_empty_model[5] = {POET_BLOB_MODEL, 0, 0, 0, 0};
    static const uint8_t end_model[1] = {POET_BLOB_MODEL};
    uint8_t *buf, *q;
    size_t i, n;

    if (size < 1 || size > 64u * 1024u)
        return -1;
    /* worst case: every input byte a record header of its own, each grown by 5 framing bytes */
    buf = malloc(32u + 3u * size);
    if (!buf)
        abort();
    q = buf;
    q += put_frame(q, POET_MSG_BEGIN_BLOB, begin_empty_model, 5);
    q += put_frame(q, POET_MSG_END_BLOB, end_model, 1);
    if (data[0] & 1u) {
        memcpy(q, data + 1, size - 1u);
        q += size - 1u;
    } else {
        for (i = 1; i + 3u <= size;) {
            uint8_t type = data[i];
            n = poet_rd16(data + i + 1);
            i += 3;
            if (n > size - i)
                n = size - i;
            /* a length over POET_FRAME_MAX goes out as is: the receiver must drop it */
            q += put_frame(q, type, data + i, (uint16_t)n);
            i += n;
        }
    }
    fuzz_port_swap(swap_area, sizeof swap_area);
    fuzz_port_feed(buf, (size_t)(q - buf));
    poet_run();
    free(buf);
    return 0;
}
