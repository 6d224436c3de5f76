"""visionlib: small convolutional building blocks."""
