#!/usr/bin/env python3
"""Writes a synthetic GPU trace in Spillway's CSV (job_id,arrival_s,runtime_s,num_gpus) on stdout.

Poisson arrivals; 1/2/4/8-GPU jobs in proportions 60/15/15/10 %; log-normal runtimes (median
30 minutes, sigma 1.5: heavy-tailed, mean about 1.5 hours, one job in a hundred over 30
hours), capped at 14 days. Seeded, so the same arguments always give the same trace.

    scripts/synthetic-trace.py [JOBS] [MEAN_INTERARRIVAL_S] [SEED] > trace.csv
    scripts/synthetic-trace.py --load L --private-gpus P [--jobs N] [--seed S] > trace.csv

With --load, the mean gap between arrivals is chosen so that the average demand (GPUs times
runtime arriving per second) is L times P private GPUs: 0.5 leaves half of them idle on
average, 2 asks for twice what they hold.

With --gangs S, each 8-GPU job is, with probability S, a multi-node gang of 2 or 4 replicas of
8 GPUs (equally likely; drawn apart, so the rest of the trace stays as without --gangs), and
a replicas column is written. --load counts the gangs' GPUs.
"""
import argparse
import math
import random

GPUS = [1, 2, 4, 8]
WEIGHTS = [60, 15, 15, 10]
MEDIAN_S = 1800.0
SIGMA = 1.5
CAP_S = 14 * 86400.0


def mean_runtime_s(rng_draws=200_000, seed=12345):
    """The runtime's mean with the cap, by sampling once (the cap makes the closed form
    exp(mu + sigma^2 / 2) slightly high)."""
    r = random.Random(seed)
    total = 0.0
    for _ in range(rng_draws):
        total += max(min(MEDIAN_S * math.exp(r.gauss(0.0, SIGMA)), CAP_S), 1.0)
    return total / rng_draws


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("positional", nargs="*", type=float, help="JOBS MEAN_INTERARRIVAL_S SEED")
    p.add_argument("--load", type=float, help="average demand as a multiple of --private-gpus")
    p.add_argument("--private-gpus", type=int, help="the private GPUs --load refers to")
    p.add_argument("--jobs", type=int, help="number of jobs (default 5000)")
    p.add_argument("--seed", type=int, help="seed (default 1)")
    p.add_argument("--gangs", type=float, help="share of 8-GPU jobs that are gangs of 2 or 4 x 8 GPUs")
    a = p.parse_args()
    pos = a.positional + [None] * (3 - len(a.positional))
    jobs = a.jobs or (int(pos[0]) if pos[0] is not None else 5000)
    seed = a.seed or (int(pos[2]) if pos[2] is not None else 1)
    if a.load is not None:
        if not a.private_gpus or a.private_gpus <= 0 or a.load <= 0:
            p.error("--load needs a positive --private-gpus and a positive load")
        share = a.gangs or 0.0
        # A gang has 3 replicas on average.
        mean_gpus = sum(g * w * (1 + 2 * share if g == 8 else 1) for g, w in zip(GPUS, WEIGHTS)) / sum(WEIGHTS)
        gap = mean_gpus * mean_runtime_s() / (a.load * a.private_gpus)
    else:
        gap = pos[1] if pos[1] is not None else 530.0
    if a.gangs is not None and not 0.0 <= a.gangs <= 1.0:
        p.error("--gangs is a share between 0 and 1")
    rng = random.Random(seed)
    gang_rng = random.Random(seed ^ 0x6A4E)
    gangs = a.gangs is not None
    print("job_id,arrival_s,runtime_s,num_gpus" + (",replicas" if gangs else ""))
    t = 0.0
    for i in range(jobs):
        t += rng.expovariate(1.0 / gap)
        gpus = rng.choices(GPUS, weights=WEIGHTS)[0]
        runtime = min(MEDIAN_S * math.exp(rng.gauss(0.0, SIGMA)), CAP_S)
        row = f"syn-{i:05d},{t:.0f},{max(runtime, 1.0):.0f},{gpus}"
        if gangs:
            replicas = 1
            if gpus == 8 and gang_rng.random() < a.gangs:
                replicas = gang_rng.choice([2, 4])
            row += f",{replicas}"
        print(row)


if __name__ == "__main__":
    main()
