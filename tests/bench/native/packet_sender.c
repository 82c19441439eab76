// SPDX-License-Identifier: GPL-2.0-only
/*
 * packet_sender: send one frame again and again through an AF_PACKET socket, as fast as one CPU can, for the
 * filter benchmark's socket input (frames that reach the receiving veth as skbs). sendmmsg in batches, qdisc
 * bypassed, so the sender's own cost per frame stays small. Runs until SIGTERM/SIGINT, then prints how many frames
 * the socket took.
 *
 * Usage: packet_sender <ifname> <frame as hex>
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define BATCH 64

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

int main(int argc, char **argv)
{
	unsigned char frame[2048];
	struct sockaddr_ll addr = {.sll_family = AF_PACKET};
	struct mmsghdr msgs[BATCH];
	struct iovec iov;
	unsigned long long sent = 0;
	size_t len, i;
	int fd, one = 1, sndbuf = 64 << 20;

	if (argc != 3 || strlen(argv[2]) % 2 || strlen(argv[2]) / 2 > sizeof(frame)) {
		fprintf(stderr, "usage: %s <ifname> <frame as hex>\n", argv[0]);
		return 2;
	}
	len = strlen(argv[2]) / 2;
	for (i = 0; i < len; i++)
		sscanf(argv[2] + 2 * i, "%2hhx", &frame[i]);
	fd = socket(AF_PACKET, SOCK_RAW, 0);
	addr.sll_ifindex = if_nametoindex(argv[1]);
	if (fd < 0 || !addr.sll_ifindex || bind(fd, (struct sockaddr *)&addr, sizeof(addr))) {
		perror(argv[1]);
		return 1;
	}
	setsockopt(fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof(one));
	/* A send buffer that the frames in flight (queued on the peer's NAPI) never fill: the sender must not wait
	 * for the receive CPU to free them, or it offers only what that CPU's wakeups let through. */
	setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof(sndbuf));
	iov.iov_base = frame;
	iov.iov_len = len;
	memset(msgs, 0, sizeof(msgs));
	for (i = 0; i < BATCH; i++) {
		msgs[i].msg_hdr.msg_iov = &iov;
		msgs[i].msg_hdr.msg_iovlen = 1;
	}
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	while (!stop) {
		int n = sendmmsg(fd, msgs, BATCH, 0);

		if (n > 0)
			sent += n;
	}
	printf("%llu\n", sent);
	return 0;
}
