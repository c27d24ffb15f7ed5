/* The protocol server's entry point: the board up, then serve the host until the link closes. A
 * standalone application (a `poet export` build) has its own main instead and links no protocol. */
#include "../../core/port.h"
#include "../../core/protocol.h"

int main(void)
{
    port_init();
    poet_run();
    return 0;
}
