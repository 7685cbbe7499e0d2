"""The scale lab: a run of N real nodes on one machine, its growth curves and a model to 10,000 nodes.

- `lab`           `ScaleLab`: bootstrap, learner and samplers in several-node processes; grows within a run
- `host`          one process holding several nodes (`run_node` / `run_bootstrap` each), writing JSON lines
- `pacing`        lab mode's pacing: p2pd starts through lab-wide slots, one generation budget per process
- `uplinks`       capped uplinks on one loopback: an HTB class per node's port (the lab in its own namespace)
- `counters`      bytes each node's own unary handlers move (the DHT's are the control plane)
- `procstat`      CPU and memory of a process and its p2pd children, from /proc
- `status_probe`  one `status` snapshot, timed, its bytes counted
- `curves`        the growth figures of one run from the hosts' lines
- `model`         structural forms fitted to the measured points, checked, evaluated to 10,000 nodes
- `plot`          the curves as a PNG
"""
