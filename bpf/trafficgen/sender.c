// SPDX-License-Identifier: GPL-2.0-only
/*
 * sender: the traffic generator's transmit side, run by BPF_PROG_RUN with BPF_F_TEST_XDP_LIVE_FRAMES (it is never
 * attached), and the counter of the frames the echo server returns (attached to the sending interface).
 *
 * xdp_send builds each frame from a base packet and an entry of diffs (a template engine), so a
 * 64-flow sweep costs a few stores per frame, not a packet copy:
 *   1. take the CPU's next entry (entries cycle in order; user space expanded variations and IMIX weights);
 *   2. write the first header_words words of the entry's base. Live frames recycle their pages with whatever
 *      the last user left in them: another base's headers, or headers the echo server swapped on the way back
 *      (on veth the returned frame is the same page). Bytes past the header region are the same zero payload in
 *      every base, so they are never rewritten;
 *   3. write the entry's diffs, checksums included (computed once per entry in user space);
 *   4. trim the frame to the entry's length (IMIX), then XDP_TX: the kernel sends it out of the interface.
 * Pacing is per CPU: a frame that is not yet due is dropped without being sent, which costs tens of
 * nanoseconds, so the rate stays smooth within a call.
 *
 * xdp_count_return counts UDP frames whose source port is in the echo range (the echo server swapped the
 * ports) and drops them; anything else passes. Attaching it also makes a veth peer, or a NIC driver, ready to
 * transmit XDP frames.
 *
 * Build: clang -O2 -g -target bpf -I/usr/include/x86_64-linux-gnu -Ibpf/include -c sender.c
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "tg_match.h"

/* A pace that fell behind catches up at most this much at once: enough to make up for the gap between two
 * BPF_PROG_RUN calls and for a sender thread preempted for tens of milliseconds on a busy host, so the average
 * rate holds, while a longer stall is not paid back as one burst. */
#define TG_PACE_SLACK_NS 50000000ULL

_Static_assert(TG_HEADER_WORD == sizeof(__u64), "the header is copied as __u64 words");
_Static_assert((TG_HEADER_MAX & (TG_HEADER_MAX - 1)) == 0, "diff offsets are masked with TG_HEADER_MAX - 1");

const volatile __u16 return_port_lo = 0;
const volatile __u16 return_port_hi = 0;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TG_BASES_MAX);
	__type(key, __u32);
	__type(value, struct tg_base);
} tg_bases SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TG_ENTRIES_MAX); /* user space sizes it to the template before load */
	__type(key, __u32);
	__type(value, struct tg_entry);
} tg_entries SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tg_cpu);
} tg_cpu SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tg_counter);
} tg_returned SEC(".maps");

static __always_inline int tg_pace(struct tg_cpu *cpu)
{
	__u64 now, due;

	if (!cpu->interval_ns)
		return 1;
	now = bpf_ktime_get_ns();
	if (now < cpu->next_ns)
		return 0;
	due = cpu->next_ns;
	if (now - due > TG_PACE_SLACK_NS)
		due = now - TG_PACE_SLACK_NS;
	cpu->next_ns = due + cpu->interval_ns;
	return 1;
}

/* Each size checks its own bound: a 2-byte diff may end exactly at data_end. */
static __always_inline void tg_write_diff(void *p, void *data_end, const struct tg_diff *d)
{
	switch (d->size) {
	case TG_DIFF_U8:
		if (p + 1 <= data_end)
			*(__u8 *)p = d->value[0];
		break;
	case TG_DIFF_U16:
		if (p + 2 <= data_end)
			*(__u16 *)p = *(const __u16 *)d->value;
		break;
	case TG_DIFF_U32:
		if (p + 4 <= data_end)
			*(__u32 *)p = *(const __u32 *)d->value;
		break;
	}
}

SEC("xdp")
int xdp_send(struct xdp_md *ctx)
{
	void *data_end = (void *)(long)ctx->data_end;
	void *data = (void *)(long)ctx->data;
	struct tg_entry *entry;
	struct tg_base *base;
	struct tg_cpu *cpu;
	__u32 zero = 0, k, base_index;
	int i;

	cpu = bpf_map_lookup_elem(&tg_cpu, &zero);
	if (!cpu)
		return XDP_ABORTED;
	if (cpu->limit && cpu->tx_packets >= cpu->limit)
		return XDP_DROP;
	if (!tg_pace(cpu)) {
		cpu->paced++;
		return XDP_DROP;
	}

	k = cpu->next_entry;
	entry = bpf_map_lookup_elem(&tg_entries, &k);
	if (!entry)
		return XDP_ABORTED;
	cpu->next_entry = k + 1 < cpu->entry_count ? k + 1 : 0;
	base_index = entry->base;
	base = bpf_map_lookup_elem(&tg_bases, &base_index);
	if (!base)
		return XDP_ABORTED;

	/* data_in is at least header_words words long (user space pads it), so these checks only guide the verifier. */
#pragma unroll
	for (i = 0; i < TG_HEADER_MAX / TG_HEADER_WORD; i++) {
		if (i >= cpu->header_words || data + (i + 1) * TG_HEADER_WORD > data_end)
			break;
		((__u64 *)data)[i] = ((__u64 *)base->header)[i];
	}

#pragma unroll
	for (i = 0; i < TG_DIFFS_MAX; i++) {
		const struct tg_diff *d = &entry->diffs[i];
		void *p;

		if (i >= entry->diff_count)
			break;
		p = data + (d->offset & (TG_HEADER_MAX - 1));
		tg_write_diff(p, data_end, d);
	}

	if (entry->frame_len < cpu->data_len && bpf_xdp_adjust_tail(ctx, (int)entry->frame_len - (int)cpu->data_len))
		return XDP_ABORTED;

	cpu->tx_packets++;
	cpu->tx_bytes += entry->frame_len;
	return XDP_TX;
}

SEC("xdp")
int xdp_count_return(struct xdp_md *ctx)
{
	struct tg_frame f;

	if (tg_parse(ctx, &f) || !tg_port_in(f.udp->source, return_port_lo, return_port_hi))
		return XDP_PASS;
	tg_count(&tg_returned, ctx->data_end - ctx->data);
	return XDP_DROP;
}

char _license[] SEC("license") = "GPL";
