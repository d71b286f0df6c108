fn main() {
    std::process::exit(jsbench::cli::main());
}
