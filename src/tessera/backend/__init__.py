"""The build driver and executor code generation."""
