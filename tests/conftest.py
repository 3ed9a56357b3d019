"""Project-wide test configuration. The grading plugin itself is dojo.grading.plugin (loaded via addopts)."""
