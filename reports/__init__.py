"""Report builders: summary.json, junit.xml and the readable console table."""
