"""Small helpers shared across the pipeline that belong to no one stage."""
