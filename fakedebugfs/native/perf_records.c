/*
 * perf_records.so: the offsets of the records of a perf ring's bytes
 * (sources/mirror.py).  Each record starts with struct perf_event_header
 * { u32 type; u16 misc; u16 size; } and the next one follows it, so
 * finding them is a walk no vector operation does; numpy reads the rest.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Offsets of the records in buf[0..len) into offs (at most max); returns
 * how many.  A size below 8 (never written by the kernel) ends the walk. */
size_t perf_record_offsets(const uint8_t *buf, size_t len, int64_t *offs, size_t max)
{
    size_t pos = 0, n = 0;
    while (pos + 8 <= len && n < max) {
        uint16_t size;
        memcpy(&size, buf + pos + 6, sizeof size);
        if (size < 8)
            break;
        offs[n++] = (int64_t)pos;
        pos += size;
    }
    return n;
}
