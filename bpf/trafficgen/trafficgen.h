/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Traffic generator: the map layouts shared by the sender, the echo server and user space, and the one rule
 * both ends use to recognise test frames (UDP to or from a port range, over IPv4 or IPv6, one 802.1Q tag at most).
 *
 * Python declares the same layouts once, in plugins/module_utils/trafficgen/generator.py, and checks them against the
 * object's BTF before it loads: a change here that Python does not follow fails the load. The limits and the sizes
 * of a write come from trafficgen_abi.h, which is generated from plugins/module_utils/trafficgen/abi.py.
 */
#ifndef XDPFLEET_TRAFFICGEN_H
#define XDPFLEET_TRAFFICGEN_H

#include <linux/types.h>

#include "trafficgen_abi.h"

/* tg_bases[i]: the first header_words words of base packet i (headers, then payload bytes). */
struct tg_base {
	__u8 header[TG_HEADER_MAX];
};

/* One write at a frame offset; value holds the bytes in frame order. */
struct tg_diff {
	__u16 offset;
	__u8 size; /* enum tg_diff_size */
	__u8 pad;
	__u8 value[4];
};

/* tg_entries[k]: frame k of the cycle, a base packet plus the bytes that differ from it (checksums included:
 * user space computes them once per entry, so nothing is summed per frame). */
struct tg_entry {
	__u8 base;
	__u8 diff_count;
	__u16 frame_len; /* the frame is trimmed to this when shorter than the run's data_in */
	__u32 pad;
	struct tg_diff diffs[TG_DIFFS_MAX];
};

/* tg_cpu[0], per CPU: one sender thread's controls (written by user space before each run, so one loaded
 * object serves a whole frame-size sweep), its place in the cycle and its counters. */
struct tg_cpu {
	__u64 interval_ns;  /* pacing: time between frames on this CPU; 0 sends as fast as possible */
	__u64 limit;        /* stop sending after this many frames on this CPU; 0 = no limit */
	__u32 entry_count;  /* entries in tg_entries */
	__u16 header_words; /* words (TG_HEADER_WORD bytes) of the base rewritten per frame */
	__u16 data_len;     /* length of the run's data_in: entries shorter than this are trimmed */
	__u64 next_ns;      /* pacing: when the next frame is due */
	__u32 next_entry;
	__u32 pad;
	__u64 tx_packets;
	__u64 tx_bytes;
	__u64 paced;        /* iterations spent waiting for the pace (dropped without sending) */
};

/* Frames counted by the echo server and by the sender's return counter, per CPU. */
struct tg_counter {
	__u64 packets;
	__u64 bytes;
};

#endif /* XDPFLEET_TRAFFICGEN_H */
