"""watch inside the trainers people use: a callback each, triggered at the trainer's own
"gradients are ready, the update is next" event (triggered.py says why), for Lightning
(lightning.py) and the Hugging Face Trainer (huggingface.py). `gradcli.callbacks` names them."""
