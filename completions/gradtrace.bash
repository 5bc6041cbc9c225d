# bash completion for gradtrace: commands, each command's options, trace
# files (*.db) and, for `gradtrace record`, Python scripts.
# Installed by pip as <prefix>/share/bash-completion/completions/gradtrace;
# from a source tree: source completions/gradtrace.bash

_gradtrace()
{
    local cur prev cmd opts
    cur=${COMP_WORDS[COMP_CWORD]}
    prev=${COMP_WORDS[COMP_CWORD-1]}
    if [[ $COMP_CWORD -eq 1 ]]; then
        COMPREPLY=($(compgen -W "record diagnose graph sql info history memory --help --version" \
            -- "$cur"))
        return
    fi
    cmd=${COMP_WORDS[1]}
    case $cmd in
    record)
        opts="-o --output -f --force -m -q --quiet --python --backward-calls
              --check-saved --check-saved=sampled --check-saved=full --check-saved=off
              --max-size --keep-last -h --help"
        case $prev in
        -o|--output) COMPREPLY=($(compgen -f -X '!*.db' -- "$cur") $(compgen -d -- "$cur"))
            return ;;
        --python) COMPREPLY=($(compgen -c -- "$cur")); return ;;
        --backward-calls|--max-size|--keep-last|-m) return ;;
        esac
        # after the script, its own arguments: files
        local i
        for ((i = 2; i < COMP_CWORD; i++)); do
            case ${COMP_WORDS[i]} in
            --|*.py) COMPREPLY=($(compgen -f -- "$cur")); return ;;
            esac
        done
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "$opts" -- "$cur"))
        else
            COMPREPLY=($(compgen -f -X '!*.py' -- "$cur") $(compgen -d -- "$cur"))
        fi
        return ;;
    diagnose) opts="--json -b --backward --color -h --help" ;;
    graph) opts="-o --output -f --format -b --backward -k --hops -a --all --no-legend
                 --saved --all-saved --bytes -h --help"
        case $prev in
        -f|--format) COMPREPLY=($(compgen -W "dot svg png" -- "$cur")); return ;;
        -o|--output) COMPREPLY=($(compgen -f -- "$cur")); return ;;
        esac ;;
    sql) opts="--table --tsv --csv --json --header --no-header --max-width -p --param
               -h --help" ;;
    info) opts="--json --all -h --help" ;;
    history) opts="--reads --all --json -h --help" ;;
    memory) opts="-c --call -a --all -n --top --json -h --help" ;;
    *) return ;;
    esac
    case $prev in
    --color) COMPREPLY=($(compgen -W "auto always never" -- "$cur")); return ;;
    -b|--backward|-k|--hops|--max-width|-p|--param|-c|--call|-n|--top) return ;;
    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
    else
        COMPREPLY=($(compgen -f -X '!*.db' -- "$cur") $(compgen -d -- "$cur"))
    fi
}
complete -o filenames -F _gradtrace gradtrace
