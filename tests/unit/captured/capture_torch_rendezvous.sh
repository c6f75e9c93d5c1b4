#!/bin/sh
# How the torch_2.13_* files in this directory were captured: torch 2.13.0 (the CPU build of the
# real-SGLang venv, gloo), through the rendezvous SGLang 0.5.23 uses for --dist-init-addr
# (init_process_group(init_method="tcp://HOST:PORT")); its scheduler logs these tracebacks after
# "Scheduler hit an exception: ". The probe prints a traceback and its elapsed time; the files are
# its raw output (stdout and stderr; the probe's own path shortened to its name) after one "# "
# header line saying which case it is. Timeouts were
# 2 s (rank 0) and 3 s (follower).
set -u
P=${PYTHON:-python3}
probe=$(dirname "$0")/torch_rendezvous_probe.py
# rank 0 alone: no follower ever joins
$P "$probe" 0 2 127.0.0.1:29621 2 > torch_2.13_tcp_rendezvous_rank0_timeout.txt 2>&1
# a follower alone: nothing listens on rank 0's address
$P "$probe" 1 2 127.0.0.1:29622 3 > torch_2.13_tcp_rendezvous_follower_connect_timeout.txt 2>&1
# both joined, then the follower is killed: what rank 0 says
$P "$probe" 0 2 127.0.0.1:29632 30 > torch_2.13_gloo_peer_killed_seen_by_rank0.txt 2>&1 & a=$!
$P "$probe" 1 2 127.0.0.1:29632 30 > /dev/null 2>&1 & b=$!
sleep 6; kill -9 $b; sleep 3; kill $a
# both joined, then rank 0 is killed: what the follower says
$P "$probe" 0 2 127.0.0.1:29633 30 > /dev/null 2>&1 & a=$!
$P "$probe" 1 2 127.0.0.1:29633 30 > torch_2.13_gloo_rank0_killed_seen_by_follower.txt 2>&1 & b=$!
sleep 6; kill -9 $a; sleep 3; kill $b
