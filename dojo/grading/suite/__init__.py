"""What runs inside pytest: the grading plugin, its failure text and the failures' causes."""
