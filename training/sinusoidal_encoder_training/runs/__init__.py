"""A training run: the loop in its phases (`loop`) and what it stands on: the Accelerator and the loaders by device
(`accelerator`), compilation (`compilation`), stopping on a signal (`stopping`), a diverging run (`divergence`), the
output disk (`disk_space`), the last evaluation batch counted once (`even_batches`), the optimizer and its schedule
(`optimization`), the metrics log (`metrics_log`), the trackers (`trackers`); and the run's folder: claimed by one
run (`run_folder`), nothing half-written (`atomic`), checkpoints and resuming (`checkpoints`)."""
