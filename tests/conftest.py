"""Project-wide test configuration. The grading plugin itself is dojo.plugin (loaded via addopts)."""
