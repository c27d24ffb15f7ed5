/* libFuzzer harness: the serial protocol as a board runs it (poet_run reading port_getc), with
 * every request handler, the model and schedule validators behind END_BLOB and the interpreter
 * behind STEP, on a 64 KiB pool (fuzz_port.c).
 * Input: one mode byte, then
 *   bit 0 = 1  raw bytes on the link (COBS framing, resynchronisation, bad CRCs, NAKs)
 *   bit 0 = 0  records [u8 type][u8 seq][u16 len][len payload bytes], each sent as a frame with a
 *              correct CRC, so mutations of a request reach its handler rather than the CRC check
 *              (a repeated seq and type is a retransmission: the replay paths)
 * Every reply must be a well-formed frame (fuzz_port.c checks each one). Each input starts from a
 * fresh link state: an empty model upload (BEGIN_BLOB model of 0 bytes, END_BLOB) drops every blob,
 * as the protocol specifies, so no state leaks from one input to the next. */
#include <stdlib.h>
#include <string.h>

#include "../core/model.h"
#include "../core/protocol.h"
#include "../core/util.h"
#include "fuzz_port.h"

/* Every node can be paged, each no bigger than the pool; a model in the fuzz port's nv storage
 * (POET_FUZZ_NV) has at most this many nodes. */
static uint8_t swap_area[(POET_FUZZ_NV / POET_NODE_SZ) * POET_FUZZ_POOL];

/* [type][seq][payload][crc32], COBS-encoded and 0x00-terminated, as the host sends it. */
static uint32_t put_frame(uint8_t *out, uint8_t type, uint8_t seq, const uint8_t *payload, uint32_t len)
{
    static uint8_t packet[2u + 65536u + 4u];
    uint32_t n = 2u + len + 4u, i = 0, o = 0;
    packet[0] = type;
    packet[1] = seq;
    memcpy(packet + 2, payload, len);
    poet_wr32(packet + 2 + len, poet_crc32(0, packet, 2u + len));
    for (;;) {
        uint32_t run = 0;
        while (i + run < n && packet[i + run] != 0 && run < 254u)
            run++;
        out[o++] = (uint8_t)(run + 1u);
        memcpy(out + o, packet + i, run);
        o += run;
        i += run;
        if (i == n)
            break;
        if (run == 254u)
            continue;
        if (++i == n) {
            out[o++] = 1;
            break;
        }
    }
    out[o++] = 0;
    return o;
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
    /* worst case: every input byte a record header of its own (6 framing bytes each), plus COBS's
     * one byte in 254 */
    buf = malloc(64u + 8u * size);
    if (!buf)
        abort();
    q = buf;
    q += put_frame(q, POET_MSG_BEGIN_BLOB, 254, begin_empty_model, 5);
    q += put_frame(q, POET_MSG_END_BLOB, 255, end_model, 1);
    if (data[0] & 1u) {
        memcpy(q, data + 1, size - 1u);
        q += size - 1u;
    } else {
        for (i = 1; i + 4u <= size;) {
            uint8_t type = data[i], seq = data[i + 1];
            n = poet_rd16(data + i + 2);
            i += 4;
            if (n > size - i)
                n = size - i;
            /* a payload over POET_FRAME_MAX goes out as is: the receiver must drop it */
            q += put_frame(q, type, seq, data + i, (uint32_t)n);
            i += n;
        }
    }
    fuzz_port_swap(swap_area, sizeof swap_area);
    fuzz_port_feed(buf, (size_t)(q - buf));
    poet_run();
    free(buf);
    return 0;
}
