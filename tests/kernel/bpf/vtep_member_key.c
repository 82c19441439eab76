// The VTEP's peer member key as the C side computes it (peer_member_key of bpf/vtep/vtep_abi.h): the frame starts
// with (ifindex, copy) as two host-order u32s, and leaves with the key in place of the ifindex.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "vtep_abi.h"

SEC("xdp")
int vtep_member_key(struct xdp_md *ctx)
{
	__u32 *words = (void *)(long)ctx->data;

	if ((void *)(words + 2) > (void *)(long)ctx->data_end)
		return XDP_ABORTED;
	words[0] = peer_member_key(words[0], words[1]);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
