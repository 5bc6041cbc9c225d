"""Trace content no fixed buffer may cut: a stale saved tensor of 70
dimensions (PyTorch's message prints all 70 sizes), and variable names of
over 200 characters written in place on source lines of over 700
characters, for a saved tensor (the error raised in backward), a leaf and
a view of a multi-output function (the errors raised at the op). The write
is the line tagged @mutation; backward runs at the line tagged @backward.

usage: diag_bounds.py dims|long|leaf|view
"""
import sys

import torch

torch.manual_seed(0)
case = sys.argv[1]

if case == "dims":
    x = torch.randn(2, 3, requires_grad=True)
    deep = x.reshape([1] * 34 + [2] + [1] * 34 + [3]) * 1.5
    assert deep.dim() == 70
    out = deep.sigmoid()  # saves its result
    out.mul_(2)  # @mutation
    out.sum().backward()  # @backward
elif case == "long":
    activations_of_the_first_encoder_block_after_the_residual_connection_and_the_layer_norm_that_we_keep_for_the_skip_path_of_the_decoder_so_that_the_name_of_this_variable_is_much_longer_than_any_fixed_buffer_could_hold_ok = torch.randn(4, requires_grad=True) * 1.0
    saved_by_sin = activations_of_the_first_encoder_block_after_the_residual_connection_and_the_layer_norm_that_we_keep_for_the_skip_path_of_the_decoder_so_that_the_name_of_this_variable_is_much_longer_than_any_fixed_buffer_could_hold_ok.sin()  # saves its input
    activations_of_the_first_encoder_block_after_the_residual_connection_and_the_layer_norm_that_we_keep_for_the_skip_path_of_the_decoder_so_that_the_name_of_this_variable_is_much_longer_than_any_fixed_buffer_could_hold_ok.mul_(1.0 + 0.0 * len("padding that makes this source line longer than seven hundred characters, so that no five-hundred-and-twelve byte buffer can hold it; the diagnosis must show the whole line, and the suggestion must quote it whole as well: the end of the line is the part a user reads last and the part a cut would lose, so it carries a marker we look for at its very end, after enough words, truly enough words in fact, to take it well past seven hundred characters in all -> END-OF-THE-LONG-LINE"))  # @mutation
    saved_by_sin.sum().backward()  # @backward
elif case == "leaf":
    parameters_of_the_embedding_table_that_a_careless_initialisation_routine_changes_in_place_while_autograd_is_recording_and_whose_name_is_longer_than_two_hundred_characters_to_check_that_nothing_cuts_it_short = torch.randn(5, requires_grad=True)
    parameters_of_the_embedding_table_that_a_careless_initialisation_routine_changes_in_place_while_autograd_is_recording_and_whose_name_is_longer_than_two_hundred_characters_to_check_that_nothing_cuts_it_short.add_(1.0 + 0.0 * len("padding that makes this source line longer than seven hundred characters, so that no five-hundred-and-twelve byte buffer can hold it; the diagnosis must show the whole line, and the suggestion must quote it whole as well: the end of the line is the part a user reads last and the part a cut would lose, so it carries a marker we look for at its very end, after enough words, truly enough words in fact, to take it well past seven hundred characters in all -> END-OF-THE-LONG-LINE"))  # @mutation
elif case == "view":
    base = torch.randn(2, 3, requires_grad=True) * 1.0
    first_piece_of_the_unbound_tensor_that_the_model_changes_in_place_although_it_is_one_of_several_views_returned_by_a_single_function_call_and_whose_name_is_also_longer_than_two_hundred_characters_in_all = base.unbind(0)[0]
    first_piece_of_the_unbound_tensor_that_the_model_changes_in_place_although_it_is_one_of_several_views_returned_by_a_single_function_call_and_whose_name_is_also_longer_than_two_hundred_characters_in_all.mul_(1.0 + 0.0 * len("padding that makes this source line longer than seven hundred characters, so that no five-hundred-and-twelve byte buffer can hold it; the diagnosis must show the whole line, and the suggestion must quote it whole as well: the end of the line is the part a user reads last and the part a cut would lose, so it carries a marker we look for at its very end, after enough words, truly enough words in fact, to take it well past seven hundred characters in all -> END-OF-THE-LONG-LINE"))  # @mutation
else:
    sys.exit("usage: diag_bounds.py dims|long|leaf|view")
