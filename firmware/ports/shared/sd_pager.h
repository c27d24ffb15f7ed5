/* The pager of the board ports with an SD card (nrf52840, mkr1000, esp32c3): port_pager_* (core/port.h)
 * over drivers/sd_spi.c, in sd_pager.c. The port supplies the card's SPI as port_sd_ops. */
#ifndef POET_SD_PAGER_H
#define POET_SD_PAGER_H

#include <stdint.h>

#include "../../drivers/sd_spi.h"

/* The port's SPI master, chip select and clock, for the SD driver. */
extern const sd_spi_ops_t port_sd_ops;

/* The driver's millisecond clock (sd_spi_ops_t.ms), from drivers/millis.c. */
uint32_t port_sd_ms(void *ctx);

#endif
