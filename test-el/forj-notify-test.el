;;; forj-notify-test.el --- A signal when forj needs you  -*- lexical-binding: t; -*-

;;; Commentary:

;; How forj chooses its way of signalling, and the mode line, the way
;; that is always there, on real turns (a scripted model, the real
;; worker) of a chat the user cannot see.  In batch the one frame never
;; has the focus, which is the case of a chat shown in a frame the user
;; is not looking at.

;;; Code:

(require 'ert)
(require 'forj-loop)
(require 'forj-notify)
(require 'forj-review)
(require 'forj-epc-test)
(require 'forj-chat-test)

(ert-deftest forj-test-notify-chooses-desktop-then-alert-then-mode-line ()
  "`auto' takes D-Bus, else alert, else the mode line; a chosen way falls back to the mode line."
  (should (eq (forj-notify-choose 'auto t t) 'notifications))
  (should (eq (forj-notify-choose 'auto nil t) 'alert))
  (should (eq (forj-notify-choose 'auto nil nil) 'mode-line))
  (should (eq (forj-notify-choose 'notifications t nil) 'notifications))
  (should (eq (forj-notify-choose 'notifications nil t) 'mode-line))
  (should (eq (forj-notify-choose 'alert t t) 'alert))
  (should (eq (forj-notify-choose 'alert t nil) 'mode-line))
  (should (eq (forj-notify-choose 'mode-line t t) 'mode-line)))

(ert-deftest forj-test-notify-a-question-is-told-apart-from-an-answer ()
  "A reply ending with a question mark (even in emphasis) is a question."
  (should (forj-notify-question-p "## Assistant\n\nShall I also fix the tests?\n"))
  (should (forj-notify-question-p "Which one do you want? **"))
  (should-not (forj-notify-question-p "Done. What was wrong? The loop.\n"))
  (should-not (forj-notify-question-p nil)))

(defmacro forj-notify-test-with-chat (replies &rest body)
  "Run BODY in a chat buffer on a fresh project whose model replays REPLIES.
The chat is in no window; signals go to the mode line."
  (declare (indent 1) (debug t))
  `(forj-test-with-project '(("notes.txt" . "remember the milk\n"))
     (let ((script (forj-chat-test--script ,replies))
           (forj-provider-scripted-delay 0.001)
           (forj-notify-method 'mode-line)
           (forj-notify-events '(review question turn-end))
           (forj-notify--pending nil)
           (global-mode-string nil))
       (unwind-protect
           (with-current-buffer (generate-new-buffer "*forj-notify-test*")
             (unwind-protect
                 (let ((output (point-marker)))
                   (setq forj-session
                         (forj-session-create
                          :root root :root-confirmed t
                          :provider (list :name "test-script" :family 'scripted :script script)
                          :view-function (lambda (event &rest _)
                                           (pcase event
                                             ('output output)
                                             ('output-to nil)
                                             ('draft "")))))
                   ,@body)
               (forj-notify--mode-line-off)
               (kill-buffer)))
         (delete-file script)))))

(defun forj-notify-test--mode-line ()
  "What forj's part of `global-mode-string' shows now.
`format-mode-line' gives nothing in batch (there is no display), so
the construct forj put there is evaluated as the mode line would."
  (if (memq 'forj-notify-mode-line global-mode-string)
      (let ((construct (symbol-value 'forj-notify-mode-line)))
        (should (eq (car construct) :eval))
        (or (eval (cadr construct) t) ""))
    ""))

(defun forj-notify-test--wait-idle ()
  "Wait until the current chat's turn is over."
  (should (forj-test--wait-for (lambda () (eq (forj-session-state forj-session) 'idle)) 60)))

(ert-deftest forj-test-notify-turn-end-of-an-unseen-chat-shows-in-the-mode-line ()
  "A turn that ends in a chat in no window says so in the mode line, until the chat is shown."
  (forj-notify-test-with-chat (list (list :text "All done."))
    (forj-loop-send "Go.")
    (forj-notify-test--wait-idle)
    (should (string-match-p "your turn in \\*forj-notify-test\\*" (forj-notify-test--mode-line)))
    (should (memq #'forj-notify--seen (default-value 'window-buffer-change-functions)))
    ;; The user selects the chat: the signal goes.
    (switch-to-buffer (current-buffer))
    (forj-notify--seen)
    (should (equal (forj-notify-test--mode-line) ""))
    (should-not (memq 'forj-notify-mode-line global-mode-string))))

(ert-deftest forj-test-notify-a-question-in-a-frame-without-focus-is-signalled ()
  "A chat shown in a frame that does not have the focus still gets the question signalled."
  (forj-notify-test-with-chat (list (list :text "Shall I delete the old files?"))
    (set-window-buffer (selected-window) (current-buffer))
    (should (get-buffer-window (current-buffer)))
    (should-not (frame-focus-state))
    (forj-loop-send "Go.")
    (forj-notify-test--wait-idle)
    (should (string-match-p "asks you a question" (forj-notify-test--mode-line)))))

(ert-deftest forj-test-notify-a-kind-left-out-is-not-signalled ()
  "With `turn-end' left out of `forj-notify-events', an ended turn signals nothing."
  (forj-notify-test-with-chat (list (list :text "All done."))
    (setq forj-notify-events '(review question))
    (forj-loop-send "Go.")
    (forj-notify-test--wait-idle)
    (should (equal (forj-notify-test--mode-line) ""))))

(ert-deftest forj-test-notify-a-waiting-review-shows-in-the-mode-line ()
  "A review that waits for the user is signalled when the chat cannot be seen."
  (forj-notify-test-with-chat
      (list (list :text (forj-chat-test--block
                         "{\"id\": \"w1\", \"name\": \"write_file\", \"args\": {\"path\": \"new.txt\", \"content\": \"x\\n\"}}"))
            (list :text "Done."))
    (forj-loop-send "Go.")
    (should (forj-test--wait-for
             (lambda () (let ((batch (forj-session-batch forj-session)))
                          (and batch (buffer-live-p (forj-tools-batch-review batch)))))
             60))
    (should (string-match-p "a review is waiting for you in \\*forj-notify-test\\*"
                            (forj-notify-test--mode-line)))
    (with-current-buffer (forj-tools-batch-review (forj-session-batch forj-session))
      (forj-review-cancel))
    (forj-notify-test--wait-idle)))

(provide 'forj-notify-test)
;;; forj-notify-test.el ends here
