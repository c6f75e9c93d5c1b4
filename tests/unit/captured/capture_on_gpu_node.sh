#!/bin/sh
# How the *h200* files in this directory were captured: run as root on a one-GPU H200 node
# (driver 580.159.04, CUDA 13.0, torch 2.11.0+cu130 with its bundled NCCL 2.28.9). Writes into $OUT;
# the files were kept with a '# Captured with ...' header line added, the NCCL log as
# nccl_2.28.9_h200_one_rank_full.log. (That node had no lspci: lspci_h200.txt says so.)
set -u
out=${OUT:-.}
smi=nvidia-smi

$smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader,nounits > "$out/query_gpu_h200.csv"
$smi topo -m > "$out/topo_h200_one_gpu.txt"
# The profile's gpu: settings (driver, model, persistence mode), with the header format=csv prints.
$smi --query-gpu=index,name,driver_version,persistence_mode,pci.bus_id --format=csv > "$out/query_gpu_settings_h200.csv"
$smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits > "$out/compute_apps_h200_idle.csv"

# One process holding GPU memory, then the same query while it runs.
python3 -c '
import sys, time, torch
x = torch.empty(2 * 1024**3, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print("ready", flush=True)
time.sleep(30)
' > "$out/holder.out" 2>&1 &
holder=$!
i=0
while [ $i -lt 60 ] && ! grep -q ready "$out/holder.out" 2>/dev/null; do sleep 0.5; i=$((i + 1)); done
$smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits > "$out/compute_apps_h200_busy.csv"
$smi --query-compute-apps=pid,used_memory --format=csv,noheader > "$out/compute_apps_h200_busy_units.csv"
echo "holder pid $holder" >> "$out/compute_apps_h200_busy.pid"
kill $holder; wait $holder 2>/dev/null

# NCCL's own confirmation of the tuned variables: one rank, NCCL_DEBUG=INFO.
NCCL_DEBUG=INFO NCCL_PROTO=LL NCCL_ALGO=Ring NCCL_P2P_LEVEL=SYS NCCL_MAX_NCHANNELS=16 \
NCCL_BUFFSIZE=16777216 NCCL_NTHREADS=512 python3 -c '
import torch, torch.distributed as dist
dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29533", rank=0, world_size=1)
t = torch.ones(1024, device="cuda")
dist.all_reduce(t)
torch.cuda.synchronize()
print("all_reduce ok", t[0].item(), "nccl", torch.cuda.nccl.version(), flush=True)
dist.destroy_process_group()
' > "$out/nccl_h200_one_rank_run.log" 2>&1

ls /sys/class/iommu > "$out/sys_class_iommu_h200.txt" 2>&1
cat /proc/cmdline > "$out/cmdline_h200.txt"
command -v lspci > "$out/lspci_h200.txt" 2>&1 || echo "lspci: command not found" > "$out/lspci_h200.txt"

# The hardware passport's sources (node/passport.py), one `-q` and the sections it holds, each
# kept with the header line; on that node the passport's tools took: nvidia-smi -q 0.12-0.13 s,
# dmesg < 0.01 s, python3's start 0.08-0.10 s (lspci, setpci, journalctl absent).
$smi -q > "$out/nvidia_smi_q_h200.txt"
for d in ROW_REMAPPER PAGE_RETIREMENT PERFORMANCE PCIE; do  # PCIE: refused by driver 580
    $smi -q -d $d > "$out/nvidia_smi_q_d_$(echo $d | tr A-Z a-z)_h200.txt" 2>&1
done
$smi --query-gpu=index,name,pci.bus_id,pstate,pcie.link.gen.current,pcie.link.gen.max,pcie.link.gen.gpumax,pcie.link.gen.hostmax,pcie.link.width.current,pcie.link.width.max,clocks_event_reasons.active,remapped_rows.pending,remapped_rows.failure,retired_pages.pending \
    --format=csv > "$out/query_gpu_pcie_h200.csv"
for d in /sys/bus/pci/devices/*; do
    for f in vendor class current_link_speed max_link_speed current_link_width max_link_width numa_node; do
        if [ -e "$d/$f" ]; then echo "$d/$f: $(cat "$d/$f" 2>&1)"; else echo "$d/$f: (absent)"; fi
    done
done > "$out/sys_pci_devices_h200.txt"
dmesg > "$out/dmesg_h200_no_xid.txt" 2>&1
