// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * tierfsctl: sizes and strings as people and JSON parsers read them.
 */
#include <stdio.h>

#include "client/ctl/ctl.h"

const char *ctl_fmt_bytes(char *buf, size_t len, double v)
{
	static const char *const unit[] = { "B",   "KiB", "MiB", "GiB",
					     "TiB", "PiB", "EiB" };
	unsigned int u = 0;

	if (v < 1024) {
		snprintf(buf, len, "%.0f B", v);
		return buf;
	}
	while (v >= 1024 && u < sizeof(unit) / sizeof(unit[0]) - 1) {
		v /= 1024;
		u++;
	}
	/* 1023.95 would print as "1024.0" */
	if (v >= 1023.95 && u < sizeof(unit) / sizeof(unit[0]) - 1) {
		v /= 1024;
		u++;
	}
	snprintf(buf, len, "%.1f %s", v, unit[u]);
	return buf;
}

void ctl_json_str(FILE *f, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	fputc('"', f);
	while (*p) {
		unsigned char c = *p;
		int n = 0;

		if (c == '"' || c == '\\') {
			fputc('\\', f);
			fputc(c, f);
			p++;
			continue;
		}
		if (c < 0x20 || c == 0x7f) {
			fprintf(f, "\\u%04x", c);
			p++;
			continue;
		}
		if (c < 0x80) {
			fputc(c, f);
			p++;
			continue;
		}
		/*
		 * File names are bytes, JSON is UTF-8: pass valid sequences
		 * through and replace each stray byte so the output always
		 * parses.
		 */
		if (c >= 0xc2 && c <= 0xdf)
			n = 1;
		else if (c >= 0xe0 && c <= 0xef)
			n = 2;
		else if (c >= 0xf0 && c <= 0xf4)
			n = 3;
		for (int i = 1; n && i <= n; i++)
			if ((p[i] & 0xc0) != 0x80)
				n = 0;
		if (n == 2 && ((c == 0xe0 && p[1] < 0xa0) ||
			       (c == 0xed && p[1] >= 0xa0)))
			n = 0;
		if (n == 3 && ((c == 0xf0 && p[1] < 0x90) ||
			       (c == 0xf4 && p[1] >= 0x90)))
			n = 0;
		if (!n) {
			fputs("\\ufffd", f);
			p++;
			continue;
		}
		fwrite(p, 1, n + 1, f);
		p += n + 1;
	}
	fputc('"', f);
}
