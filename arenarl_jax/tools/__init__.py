"""Command-line reports and studies: each module has a main()."""
