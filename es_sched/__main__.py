from es_sched.cli import main

main()
