from ingestor.cli import main

if __name__ == "__main__":  # spawned build workers import the main module again
    main()
