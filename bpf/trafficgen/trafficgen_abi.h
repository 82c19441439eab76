/* SPDX-License-Identifier: GPL-2.0-only */

/*
 * Generated from plugins/module_utils/trafficgen/abi.py and plugins/module_utils/trafficgen/layouts.py by `make abi`:
 * edit those files, not this one (tests/unit/test_abi.py fails when they differ). The traffic generator's limits and
 * encodings, shared by the sender and user space.
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

/* tg_bases[i]: the first header_words words of base packet i (headers, then payload bytes). */
struct tg_base {
	__u8 header[TG_HEADER_MAX];
};
_Static_assert(sizeof(struct tg_base) == 128, "the size of TgBase in Python");

/* One write at a frame offset; value holds the bytes in frame order. */
struct tg_diff {
	__u16 offset;
	__u8 size; /* enum tg_diff_size */
	__u8 pad;
	__u8 value[4];
};
_Static_assert(sizeof(struct tg_diff) == 8, "the size of TgDiff in Python");

/*
 * tg_entries[k]: frame k of the cycle, a base packet plus the bytes that differ from it (checksums included: user space
 * computes them once per entry, so nothing is summed per frame).
 */
struct tg_entry {
	__u8 base;
	__u8 diff_count;
	__u16 frame_len; /* the frame is trimmed to this when shorter than the run's data_in */
	__u32 pad;
	struct tg_diff diffs[TG_DIFFS_MAX];
};
_Static_assert(sizeof(struct tg_entry) == 72, "the size of TgEntry in Python");

/*
 * tg_cpu[0], per CPU: one sender thread's controls (written by user space before each run, so one loaded object serves
 * a whole frame-size sweep), its place in the cycle and its counters.
 */
struct tg_cpu {
	__u64 interval_ns; /* pacing: time between frames on this CPU; 0 sends as fast as possible */
	__u64 limit; /* stop sending after this many frames on this CPU; 0 = no limit */
	__u32 entry_count; /* entries in tg_entries */
	__u16 header_words; /* words (TG_HEADER_WORD bytes) of the base rewritten per frame */
	__u16 data_len; /* length of the run's data_in: entries shorter than this are trimmed */
	__u64 next_ns; /* pacing: when the next frame is due */
	__u32 next_entry;
	__u32 pad;
	__u64 tx_packets;
	__u64 tx_bytes;
	__u64 paced; /* iterations spent waiting for the pace (dropped without sending) */
};
_Static_assert(sizeof(struct tg_cpu) == 64, "the size of TgCpu in Python");

/* Frames counted by the echo server and by the sender's return counter, per CPU. */
struct tg_counter {
	__u64 packets;
	__u64 bytes;
};
_Static_assert(sizeof(struct tg_counter) == 16, "the size of TgCounter in Python");

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
