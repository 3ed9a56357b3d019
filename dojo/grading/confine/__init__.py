"""What confines candidate code: the bubblewrap sandbox, bounded children, the audit hook."""
