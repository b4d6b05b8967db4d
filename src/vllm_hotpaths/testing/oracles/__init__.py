"""What two implementations must agree on, where a plain bit comparison is not the whole story."""
