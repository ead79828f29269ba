"""hpcmon post_job package."""
