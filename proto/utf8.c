/*
 * proto/utf8.c - strict UTF-8 validation and sanitizing for proto/ (RFC 3629).
 */
#include "proto/utf8.h"

#include <string.h>

size_t proto_utf8_char(const unsigned char *s, size_t n)
{
	unsigned char c;

	if (n == 0)
		return 0;
	c = s[0];
	if (c < 0x80)
		return 1;
	if (c < 0xC2 || c > 0xF4)
		return 0; /* continuation byte, overlong lead, or beyond U+10FFFF */
	if (c < 0xE0) {
		if (n < 2 || (s[1] & 0xC0) != 0x80)
			return 0;
		return 2;
	}
	if (c < 0xF0) {
		if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80)
			return 0;
		if (c == 0xE0 && s[1] < 0xA0)
			return 0; /* overlong */
		if (c == 0xED && s[1] >= 0xA0)
			return 0; /* UTF-16 surrogate */
		return 3;
	}
	if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 ||
	    (s[3] & 0xC0) != 0x80)
		return 0;
	if (c == 0xF0 && s[1] < 0x90)
		return 0; /* overlong */
	if (c == 0xF4 && s[1] >= 0x90)
		return 0; /* above U+10FFFF */
	return 4;
}

int proto_utf8_valid(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, k;

	while (i < n) {
		if (p[i] < 0x80) {
			i++;
			continue;
		}
		k = proto_utf8_char(p + i, n - i);
		if (k == 0)
			return 0;
		i += k;
	}
	return 1;
}

size_t proto_utf8_sanitize(char *dst, const char *src, size_t src_len, size_t budget)
{
	const unsigned char *p = (const unsigned char *)src;
	size_t i = 0, o = 0, k;

	if (budget > src_len)
		budget = src_len;
	while (i < budget) {
		/* NUL is valid UTF-8 but a JSON reader may refuse "\u0000"
		 * (jansson does by default): it is replaced too. */
		k = p[i] == 0 ? 0 : proto_utf8_char(p + i, src_len - i);
		if (k == 0) {
			memcpy(dst + o, "\xEF\xBF\xBD", 3);
			o += 3;
			i++;
			continue;
		}
		if (i + k > budget)
			break;
		memcpy(dst + o, p + i, k);
		o += k;
		i += k;
	}
	return o;
}

void proto_utf8_copy_cut(char *dst, const char *s, size_t len, size_t max)
{
	if (len > max) {
		len = max;
		while (len > 0 && ((unsigned char)s[len] & 0xC0) == 0x80)
			len--;
	}
	memcpy(dst, s, len);
	dst[len] = '\0';
}
