#!/usr/bin/env python3
"""Writes a synthetic GPU trace in Spillway's CSV (job_id,arrival_s,runtime_s,num_gpus) on stdout.

Poisson arrivals; 1/2/4/8-GPU jobs in proportions 60/15/15/10 %; log-normal runtimes (median
30 minutes, sigma 1.5: heavy-tailed, mean about 1.5 hours, one job in a hundred over 30
hours), capped at 14 days. Seeded, so the same arguments always give the same trace.

    scripts/synthetic-trace.py [JOBS] [MEAN_INTERARRIVAL_S] [SEED] > trace.csv
"""
import math
import random
import sys

jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
gap = float(sys.argv[2]) if len(sys.argv) > 2 else 530.0
seed = int(sys.argv[3]) if len(sys.argv) > 3 else 1
rng = random.Random(seed)
print("job_id,arrival_s,runtime_s,num_gpus")
t = 0.0
for i in range(jobs):
    t += rng.expovariate(1.0 / gap)
    gpus = rng.choices([1, 2, 4, 8], weights=[60, 15, 15, 10])[0]
    runtime = min(1800.0 * math.exp(rng.gauss(0.0, 1.5)), 14 * 86400.0)
    print(f"syn-{i:05d},{t:.0f},{max(runtime, 1.0):.0f},{gpus}")
