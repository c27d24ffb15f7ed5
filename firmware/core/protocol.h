/* Serial protocol (docs/spec.md section 6): framing, the request handlers and the pool layout. */
#ifndef POET_PROTOCOL_H
#define POET_PROTOCOL_H

#include <stdint.h>

#define POET_PROTO 1
#define POET_FW_MAJOR 1
#define POET_FW_MINOR 0

#define POET_FRAME_MAX 1024u
#define POET_SYNC 0xA5u

enum {
    POET_MSG_HELLO = 0x01,
    POET_MSG_BEGIN_BLOB = 0x02,
    POET_MSG_CHUNK = 0x03,
    POET_MSG_END_BLOB = 0x04,
    POET_MSG_STEP = 0x05,
    POET_MSG_READ = 0x06,
    POET_MSG_ACK = 0x80,
    POET_MSG_HELLO_REPLY = 0x81,
    POET_MSG_DATA = 0x84,
    POET_MSG_DONE = 0x85,
    POET_MSG_TRACE = 0x86
};

enum { POET_BLOB_MODEL = 1, POET_BLOB_WEIGHTS = 2, POET_BLOB_SCHEDULE = 3, POET_BLOB_BATCH = 4, POET_BLOB_OPT_STATE = 5 };

/* Serve requests until port_getc reports the link closed. */
void poet_run(void);

/* Handle one received, CRC-checked frame (exposed for ports and tests). */
void poet_handle_frame(uint8_t type, const uint8_t *payload, uint16_t len);

#endif
