"""Code generators: TIR to C."""
