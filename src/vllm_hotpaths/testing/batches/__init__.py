"""Standalone batch models driven through upstream's transitions."""
