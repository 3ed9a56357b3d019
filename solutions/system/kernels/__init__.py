"""The fast paths: packed weight modes, the native Q4_1 x Q8_1 kernel and fused step, fused attention.

Each is tested against the readable path it replaces (solutions.model, the kata references)."""
