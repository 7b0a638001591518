"""Stage 6: publishing a family: its repos laid out exactly as on the Hub, their cards rendered, pushed in one step."""
