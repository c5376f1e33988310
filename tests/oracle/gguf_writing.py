"""What the oracle scripts share when they write a tiny checkpoint as a GGUF file the way llama.cpp's
convert_hf_to_gguf.py does: the hyperparameters every architecture writes, and the F32 tensors."""
import gguf
import numpy as np


def begin_gguf(path, arch, config, head_dim=None):
    """A writer for `arch` with the keys every converter writes from a transformers config; head_dim
    as key_length / value_length where the converter writes them (not for phi3)."""
    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"servelab tiny {arch}")
    w.add_context_length(config.max_position_embeddings)
    w.add_embedding_length(config.hidden_size)
    w.add_block_count(config.num_hidden_layers)
    w.add_feed_forward_length(config.intermediate_size)
    w.add_head_count(config.num_attention_heads)
    w.add_head_count_kv(config.num_key_value_heads)
    w.add_layer_norm_rms_eps(config.rms_norm_eps)
    w.add_file_type(0)
    if head_dim is not None:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    return w


def finish_gguf(w, tensors):
    """Writes (gguf name, array) pairs as F32 and closes the file."""
    for name, t in tensors:
        w.add_tensor(name, np.ascontiguousarray(t, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
