"""watch inside the trainers people use, the library's half: the watch a callback triggers at the
trainer's own "gradients are ready, the update is next" event, joined to a watch already
installed (triggered.py), and the trainer's own loss code run again at a stop (steps.py). The
callbacks themselves, which only adapt a trainer's events and print their report, are
gradcli/callbacks/ (`gradcli.callbacks.LightningCallback`, `TrainerCallback`)."""
