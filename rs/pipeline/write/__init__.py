"""Stage 5: the splits' files, the opt-in repos' rows and the family report, from the routed stores."""
