/* SPDX-License-Identifier: GPL-2.0-only */

/*
 * Generated from plugins/module_utils/trafficgen/abi.py by `make abi`: edit that file, not this one
 * (tests/unit/test_abi.py fails when the two differ). The traffic generator's limits and encodings, shared by the
 * sender and user space.
 */

#ifndef XDPFLEET_TRAFFICGEN_ABI_H
#define XDPFLEET_TRAFFICGEN_ABI_H

#include <linux/types.h>

/* A template's limits, as the sender's maps hold it. */
enum tg_limits {
	/* bytes of a base packet rewritten per frame, at most (a power of two: diff offsets are masked with it) */
	TG_HEADER_MAX = 128,
	TG_HEADER_WORD = 8, /* the sender rewrites the header in words of this many bytes (tg_cpu.header_words) */
	TG_BASES_MAX = 8, /* base packets of a template (tg_bases) */
	TG_DIFFS_MAX = 8, /* writes per entry (tg_entry.diffs) */
	TG_ENTRIES_MAX = 65536, /* entries of a template's cycle (tg_entries, sized to the template before load) */
};

/* tg_diff.size: the writes the sender makes, in bytes. */
enum tg_diff_size {
	TG_DIFF_U8 = 1, /* the last byte of a frame of odd length */
	TG_DIFF_U16 = 2, /* one 16-bit word */
	TG_DIFF_U32 = 4, /* two adjacent 16-bit words */
};

/*
 * Every enum above as a member, so that each reaches the object's BTF, where user space compares it with
 * plugins/module_utils/trafficgen/abi.py. Nothing reads the variable; its section is not one that libbpf loads, so it
 * costs no map and no instruction.
 */
struct trafficgen_abi {
	enum tg_limits tg_limits;
	enum tg_diff_size tg_diff_size;
};
static const struct trafficgen_abi trafficgen_abi __attribute__((section(".xdpfleet_abi"), used));

#endif /* XDPFLEET_TRAFFICGEN_ABI_H */
