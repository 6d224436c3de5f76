"""textmodels: transformer pieces."""
