"""Stage 5, the reports: validation reports compared, HTML charts, the fleet report."""
