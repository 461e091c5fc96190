from vrag_compress.cli import main

main()
