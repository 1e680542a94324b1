;;; forj-loop-test.el --- The tool loop on a session, with no chat buffer  -*- lexical-binding: t; -*-

;;; Commentary:

;; The loop (forj-loop.el) driven on a bare session in a buffer with no
;; window and no chat mode: a scripted model asks for a tool, the real
;; worker runs it, the model is resumed and answers.  What the loop
;; tells the view is recorded, not drawn.

;;; Code:

(require 'ert)
(require 'forj-loop)
(require 'forj-epc-test)
(require 'forj-chat-test)

(ert-deftest forj-test-loop-runs-a-turn-without-the-chat ()
  "The loop runs a whole turn on a session whose view only records events."
  (forj-test-with-project '(("notes.txt" . "remember the milk\n"))
    (let* ((script (forj-chat-test--script
                    (list (list :text (concat "Let me read it.\n\n"
                                              (forj-chat-test--block
                                               "{\"id\": \"r1\", \"name\": \"read_file\", \"args\": {\"path\": \"notes.txt\"}}")))
                          (list :text "The note says: remember the milk."))))
           (forj-provider-scripted-delay 0.001)
           (events nil))
      (unwind-protect
          (with-temp-buffer
            (let ((output (point-marker)))
              (setq forj-session
                    (forj-session-create
                     :root root :root-confirmed t
                     :provider (list :name "test-script" :family 'scripted :script script)
                     :view-function (lambda (event &rest _)
                                      (push event events)
                                      (pcase event
                                        ('output output)
                                        ('output-to nil)
                                        ('draft "")))))
              (forj-loop-send "What does notes.txt say?")
              (should (forj-test--wait-for (lambda () (eq (forj-session-state forj-session) 'idle)) 30))
              (should-not (derived-mode-p 'forj-chat-mode))
              (should-not (get-buffer-window))
              (let ((record (forj-session-record forj-session)))
                (should (equal (mapcar (lambda (e) (plist-get e :role)) record)
                               '("user" "assistant" "tool" "assistant")))
                (should (string-match-p "```tool-result\n{\"id\":\"r1\",\"name\":\"read_file\",\"ok\":true"
                                        (plist-get (nth 2 record) :text)))
                (should (string-match-p "remember the milk" (plist-get (nth 2 record) :text)))
                (should (equal (plist-get (nth 3 record) :text)
                               "## Assistant\n\nThe note says: remember the milk.\n")))
              ;; The view was told each step, in order.
              (let ((told (cl-remove-if (lambda (e) (memq e '(reply-text wait-over output output-to draft insert)))
                                        (reverse events))))
                (should (equal told '(user-message reply-start reply-end results-start results-end
                                                   reply-start reply-end turn-end))))))
        (delete-file script)))))

(provide 'forj-loop-test)
;;; forj-loop-test.el ends here
