/*
 * Bob Jenkins' lookup2 hash ("hash()" of lookup2.c, 1996), which the 2009
 * kernel ships as jhash() in include/linux/jhash.h, written out here in C so
 * the Python port can be checked against an independent implementation.
 *
 *   jhash_lookup2 [--init N] STRING...   prints "STRING HASH" per argument
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define mix(a, b, c) \
	do { \
		a -= b; a -= c; a ^= (c >> 13); \
		b -= c; b -= a; b ^= (a << 8); \
		c -= a; c -= b; c ^= (b >> 13); \
		a -= b; a -= c; a ^= (c >> 12); \
		b -= c; b -= a; b ^= (a << 16); \
		c -= a; c -= b; c ^= (b >> 5); \
		a -= b; a -= c; a ^= (c >> 3); \
		b -= c; b -= a; b ^= (a << 10); \
		c -= a; c -= b; c ^= (b >> 15); \
	} while (0)

static uint32_t lookup2(const unsigned char *k, uint32_t length, uint32_t initval)
{
	uint32_t a = 0x9e3779b9, b = 0x9e3779b9, c = initval, len = length;

	while (len >= 12) {
		a += k[0] + ((uint32_t)k[1] << 8) + ((uint32_t)k[2] << 16) + ((uint32_t)k[3] << 24);
		b += k[4] + ((uint32_t)k[5] << 8) + ((uint32_t)k[6] << 16) + ((uint32_t)k[7] << 24);
		c += k[8] + ((uint32_t)k[9] << 8) + ((uint32_t)k[10] << 16) + ((uint32_t)k[11] << 24);
		mix(a, b, c);
		k += 12;
		len -= 12;
	}
	c += length;
	switch (len) {	/* every case falls through */
	case 11: c += (uint32_t)k[10] << 24; /* fall through */
	case 10: c += (uint32_t)k[9] << 16; /* fall through */
	case 9: c += (uint32_t)k[8] << 8; /* fall through */
	case 8: b += (uint32_t)k[7] << 24; /* fall through */
	case 7: b += (uint32_t)k[6] << 16; /* fall through */
	case 6: b += (uint32_t)k[5] << 8; /* fall through */
	case 5: b += k[4]; /* fall through */
	case 4: a += (uint32_t)k[3] << 24; /* fall through */
	case 3: a += (uint32_t)k[2] << 16; /* fall through */
	case 2: a += (uint32_t)k[1] << 8; /* fall through */
	case 1: a += k[0];
	}
	mix(a, b, c);
	return c;
}

int main(int argc, char **argv)
{
	uint32_t init = 0;
	int i = 1;

	if (argc > 2 && !strcmp(argv[1], "--init")) {
		init = strtoul(argv[2], NULL, 0);
		i = 3;
	}
	for (; i < argc; i++)
		printf("%s %u\n", argv[i],
		       lookup2((const unsigned char *)argv[i], strlen(argv[i]), init));
	return 0;
}
