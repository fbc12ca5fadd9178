from ingestor.cli import main

main()
