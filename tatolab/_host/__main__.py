from tatolab._host.main import main

main()
