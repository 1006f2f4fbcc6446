"""What the head drafters (EAGLE, DFlash/DSpark, MTP, Medusa, MLP speculators) share: where a head's files are
(files.py), the GGUF header and tokenizer a converted head carries (gguf.py), a draft step's scores in half
precision on a CPU (torch_ops.py), the chains and trees of a head fed the target's features
(feature_drafter.py: EAGLE, MiMo's MTP layer) and the one-layer torch head of EAGLE-1's shape (one_layer.py).
A family imports these, never another family."""
