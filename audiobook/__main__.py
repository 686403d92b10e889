from audiobook.cli import main

main()
