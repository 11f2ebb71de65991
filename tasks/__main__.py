from tasks.cli import main

main()
