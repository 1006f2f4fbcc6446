"""What the head drafters (EAGLE, DFlash/DSpark, MTP, Medusa, MLP speculators) share: where a head's files are
(files.py), the GGUF header and tokenizer a converted head carries (gguf.py), a draft step's scores in half
precision on a CPU (torch_ops.py). A family imports these, never another family."""
