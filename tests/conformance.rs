//! Every check of tests/support/conformance.rs on every arch of tests/support/cases.rs, one
//! test per (case, check): `cargo test --test conformance pi05::` runs one arch's. A new arch
//! is one line in `arch_cases!`; arch-specific behaviour stays in tests/<arch>.rs.

#[macro_use]
mod support;

macro_rules! conformance_tests {
    ($($name:ident $fields:tt),* $(,)?) => {$(
        mod $name {
            use crate::support::{cases::case, conformance as check};

            #[test]
            fn deterministic_on_cpu() {
                check::deterministic_on_cpu(&case(stringify!($name)));
            }

            #[test]
            fn info_and_chunk_shape() {
                check::info_and_chunk_shape(&case(stringify!($name)));
            }

            #[test]
            fn chunk_depends_on_every_input() {
                check::chunk_depends_on_every_input(&case(stringify!($name)));
            }

            #[test]
            fn equivalent_inputs_give_the_same_chunk() {
                check::equivalent_inputs_give_the_same_chunk(&case(stringify!($name)));
            }

            #[test]
            fn bad_requests_are_errors() {
                check::bad_requests_are_errors(&case(stringify!($name)));
            }

            #[test]
            fn instructions_of_any_length() {
                check::instructions_of_any_length(&case(stringify!($name)), "cpu");
            }

            #[test]
            fn instructions_of_any_length_on_vulkan() {
                check::instructions_of_any_length(&case(stringify!($name)), "vulkan");
            }

            #[test]
            fn prompt_without_a_tokenizer_is_an_error() {
                check::prompt_without_a_tokenizer_is_an_error(&case(stringify!($name)));
            }

            #[test]
            fn agrees_with_cpu_on_vulkan() {
                check::agrees_with_cpu_on_vulkan(&case(stringify!($name)));
            }

            #[cfg(feature = "ggml")]
            #[test]
            fn agrees_with_cpu_on_ggml() {
                check::agrees_with_cpu_on_ggml(&case(stringify!($name)));
            }

            #[test]
            fn bf16_tables_run_everywhere() {
                check::bf16_tables_run_everywhere(&case(stringify!($name)));
            }

            #[test]
            fn one_run_matches_stepwise() {
                check::one_run_matches_stepwise_everywhere(&case(stringify!($name)));
            }

            #[test]
            fn batch_matches_alone_on_cpu() {
                let case = case(stringify!($name));
                crate::support::batching::batch_matches_alone(&case, "cpu", None);
                crate::support::batching::batch_matches_alone(&case, "cpu", Some(true));
            }

            #[test]
            fn batch_matches_alone_on_vulkan() {
                let case = case(stringify!($name));
                crate::support::batching::batch_matches_alone(&case, "vulkan", None);
            }

            #[cfg(feature = "ggml")]
            #[test]
            fn batch_matches_alone_on_ggml() {
                let case = case(stringify!($name));
                crate::support::batching::batch_matches_alone(&case, "ggml", None);
            }

            #[test]
            fn steps_option_sets_the_step_count() {
                check::steps_option_sets_the_step_count(&case(stringify!($name)));
            }
        }
    )*};
}

arch_cases!(conformance_tests);
