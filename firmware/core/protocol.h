/* Serial protocol (docs/spec.md section 6): framing, the request handlers and the pool layout. */
#ifndef POET_PROTOCOL_H
#define POET_PROTOCOL_H

#include <stdint.h>

#define POET_PROTO 4
#define POET_FW_MAJOR 2
#define POET_FW_MINOR 2

/* A frame (docs/spec.md section 6) is a packet [type][seq][payload][crc32] COBS-encoded and ended
 * by a 0x00 byte. */
#define POET_FRAME_MAX 1024u                     /* payload bytes */
#define POET_PACKET_MAX (2u + POET_FRAME_MAX + 4u)
#define POET_TRACE_PER_FRAME_MAX 60u

enum {
    POET_MSG_HELLO = 0x01,
    POET_MSG_BEGIN_BLOB = 0x02,
    POET_MSG_CHUNK = 0x03,
    POET_MSG_END_BLOB = 0x04,
    POET_MSG_STEP = 0x05,
    POET_MSG_READ = 0x06,
    POET_MSG_VERIFY = 0x07, /* the aux weights already on aux storage: CRC-32 them (docs/spec.md 6) */
    POET_MSG_FEATURES = 0x08, /* the feature cache: KEEP a node's output, or STAGE a batch from it */
    POET_MSG_ACK = 0x80,
    POET_MSG_HELLO_REPLY = 0x81,
    POET_MSG_DATA = 0x84,
    POET_MSG_DONE = 0x85,
    POET_MSG_TRACE = 0x86,
    POET_MSG_NAK = 0x8F /* seq 0: a damaged frame arrived; the host resends without waiting */
};

enum {
    POET_BLOB_MODEL = 1,   /* nv storage, at 0 */
    POET_BLOB_WEIGHTS = 2, /* the trained parameters: pool */
    POET_BLOB_SCHEDULE = 3,
    POET_BLOB_BATCH = 4,
    POET_BLOB_OPT_STATE = 5,
    POET_BLOB_FROZEN = 6,  /* the frozen parameters: nv storage, after the model (POET_NV_PAGE-aligned) */
    POET_BLOB_AUX = 7      /* the frozen parameters on aux storage (POET_PARAM_AUX): the pager, past the swap area */
};

/* FEATURES modes (docs/spec.md 6) */
enum { POET_FEATURES_KEEP = 1, POET_FEATURES_STAGE = 2 };

/* The alignment of each upload into nv storage: a multiple of every port's flash erase unit
 * (nRF52840 page 4 KiB, SAMD21 row 256 B, ESP32-C3 sector 4 KiB), so re-uploading one blob never
 * erases another's page. */
#define POET_NV_PAGE 4096u

/* Serve requests until port_getc reports the link closed. */
void poet_run(void);

/* Feed one received byte to the frame decoder; a complete, CRC-checked frame is handled at once
 * (poet_run calls this for every byte; exposed for ports that receive otherwise, and the fuzzer). */
void poet_rx_byte(uint8_t c);

/* Handle one decoded, CRC-checked request (exposed for tests). */
void poet_handle_frame(uint8_t type, uint8_t seq, const uint8_t *payload, uint16_t len);

#endif
