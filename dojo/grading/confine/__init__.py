"""What confines a submission: the bubblewrap sandbox, the audit hook, bounded children for its data."""
